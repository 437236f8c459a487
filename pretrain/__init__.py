"""Corpus → tokenized cache → RTD/MLM pretraining → discriminator bundle."""
