"""The engine of one case: its servers, its requests, its numbers and its verdict, with no pytest."""
