"""What a response says: feedback, hint headers, RateLimit fields, soft blocks."""
