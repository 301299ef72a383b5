"""Settings: the Settings object, TOML and Scrapy names, checks, what took effect."""
