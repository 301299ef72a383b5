"""robots.txt: the rules, their cache, the library clients' guard."""
