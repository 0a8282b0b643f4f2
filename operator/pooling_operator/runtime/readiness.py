"""The replica's readiness (`/readyz`), apart from kopf's liveness (`/healthz`): ready once it can do what the
Service sends it, answering admission reviews over TLS, which needs the webhook's serving certificate loaded
(runtime/webhook_certs.py). A replica that stands by for the Lease is ready: every replica serves the webhook.
Liveness says the process is not stuck; readiness keeps a replica without a certificate out of the Service."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


async def serve(bind: str, port: int, why_not_ready: Callable[[], str | None]) -> web.AppRunner:
    """Serve GET /readyz on `bind`:`port`: 200 "ok", or 503 with what is missing."""

    async def readyz(_: web.Request) -> web.Response:
        why = why_not_ready()
        return web.Response(text="ok\n") if why is None else web.Response(status=503, text=why + "\n")

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, bind, port).start()
    return runner
