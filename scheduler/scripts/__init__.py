"""The Lua transitions (`lua/`, one file each): their text with includes resolved, the calls
that run them, and their replies decoded once."""
