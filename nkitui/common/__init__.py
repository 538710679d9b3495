"""Small shared types and helpers used by every domain layer (no Textual here)."""
