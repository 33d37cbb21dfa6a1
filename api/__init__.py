"""The Stats API service: Plausible's v2 query endpoint over Tally's query layer (docs/API.md)."""
