"""Where the parts meet: a session (the lab opened, guarded and logged) and the runner every
door calls tools through."""
