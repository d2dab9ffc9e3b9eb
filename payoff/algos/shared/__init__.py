"""Math shared by several algorithms (advantages, log-probabilities, KL estimators), written once."""
