"""The static HTML report: data gathered from the audit views, the charts, the pages.

May import: every package below it (core ... audit).
"""
