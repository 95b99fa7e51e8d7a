"""The read models: what the operators' views, the task API, the CLI and the gauges' scrape read,
each a function of the caller's session (or connection) that builds its own statements and writes
nothing.

One module per view: ``lists`` (the operators' lists, filtered and paged, and what counts as
retrying), ``overview`` (the console's overview: work flowing, what needs a person),
``console_pages`` (one dead letter, incident, orphan event or endpoint with its operator history;
the clients' list), ``task_page`` (a task's console page) and ``gauge_counts`` (the business
gauges' grouped counts at scrape time). Where the two databases answer a read differently
(a statement timeout, a table's estimated size, a minute's bucket, the planner's estimate), they
ask the store (``models.store.store_of(session).reads``), never which database it is.

They stand on the tables and the store: no other module of ``models`` imports them (a contract
in ``pyproject.toml``), and like all of ``models`` they import only ``core`` and SQLAlchemy:
settings and decoding stay with the caller, which passes plain values in (a page's limits) and
decodes what they hand back as stored (a task's outcome: ``app.console.task_views``). They moved
here from ``service/`` (issue 42: ``service/`` builds no statement of its own).
"""
