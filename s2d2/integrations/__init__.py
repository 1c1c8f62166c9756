"""Bridges from this project to other software: serving engines and evaluation harnesses."""
