"""From outcomes to numbers and pages: the card's Elo fit (`elo`), intervals (`stats`), paired
comparisons (`paired`), report.json and its Markdown view (`report`), safe report files
(`reports_io`) and plots (`plots`). Pure functions; no model, no torch."""
