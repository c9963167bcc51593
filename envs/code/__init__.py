"""A multi-turn coding environment on the code sandbox, with a problem set written for roll."""
