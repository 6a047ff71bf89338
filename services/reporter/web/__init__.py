"""The dashboard: a web service over the results views (``spotsweep dashboard``).

``app.make_app(db)`` is the ASGI app (tests serve it with uvicorn);
``main.serve(settings, host, port)`` is what the CLI runs. Neither is imported
here: ``spotsweep report`` and ``logs`` import this package's queries, and
should not pay for the web framework and the importance model (0.3 s).
"""
