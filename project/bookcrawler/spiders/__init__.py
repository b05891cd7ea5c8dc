"""Spiders of the book crawl."""
