"""Test support written once: fakes of the project's own Protocols, shared by every tier."""
