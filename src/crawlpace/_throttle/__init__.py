"""The throttler: its waiting room, board, permits, releases, reports, warm start."""
