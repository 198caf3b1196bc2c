"""Task definitions (one folder per task), their data and their evaluators."""
