"""Workflow categories, templates, workflows and their tasks (workflow actions)."""
