"""``aexec serve``: an HTTP service speaking SandboxFusion's ``/run_code`` and aexec's own
contract (``/observe``, ``/observe_many``). An optional part (``pip install
'aexec[serve]'``): Starlette and Hypercorn are imported only when it is used.

``sandboxfusion`` maps SandboxFusion's requests and answers (pure), ``app`` is the ASGI
application, ``server`` runs it under Hypercorn on either anyio backend.
"""
