"""Notification channel kinds (one module each) behind ``base.ChannelKind``."""
