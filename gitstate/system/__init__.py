"""What gitstate asks of the operating system: safe file writes (the only module that
opens a file for writing) and a report's tree published whole on them, kernel locks, the
configuration file, the clock's readings, fault injection for crash tests, the git CLI, ssh
signatures and the guard of local HTTP servers.

May import: core.
"""
