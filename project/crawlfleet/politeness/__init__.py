"""Politeness at cluster scale: one rate budget per politeness key shared by every worker
through the hub (``budget``), adapting to bans, and its settings (``config``)."""
