"""Helpers shared by railyard's tests (real-daemon harnesses and the like)."""
