"""The console's web app (FastAPI + Jinja2): pages over one deployment, and one action.

GET and HEAD on a loopback host are served, and one POST: starting an adapter's re-evaluation
(`/registry/<base>/<adapter>/evaluate`), accepted only from the console's own pages (its Origin,
else its Referer, names the request's host). Every other method or POST is refused. Errors get
one-line 403, 404, 409, 502 or 500 pages, never a stack trace.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from mazeops.adapter_rows import AdapterNotReevaluable
from mazeops.names import InvalidName
from mazeops.ray_jobs import RayJobError, RayUnavailable
from mazeops.reevaluation import ReevaluationAlreadyStarted
from mazeops.serve_client import ServeUnavailable
from opsconsole import pages
from opsctl.errors import OpsError
from opsctl.target import Target

READ_METHODS = frozenset({"GET", "HEAD"})
# The one POST the console accepts: start an adapter's next evaluation attempt.
ACTION_PATH = re.compile(r"/registry/[^/]+/[^/]+/evaluate")
LOOPBACK_HOSTS = ["127.0.0.1", "localhost"]
UPSTREAM_ERRORS = (ClientError, BotoCoreError, RayUnavailable, RayJobError, ServeUnavailable, OpsError)
TEMPLATES = Jinja2Templates(directory=Path(__file__).with_name("templates"))
log = logging.getLogger(__name__)


def _page(request: Request, template: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)


def _error(request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
    return _page(request, "error.html", {"status": status_code, "title": title, "message": message}, status_code)


def same_origin(request: Request) -> bool:
    """Whether the request comes from a console page: its Origin (else Referer) header names the request's host."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return False
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc == request.headers.get("host")


def create_app(target: Target) -> FastAPI:
    """The console app over the deployment `target` (its AWS APIs, Ray Jobs API and serve URL)."""
    app = FastAPI(title="maze-rl-ops console", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)

    @app.middleware("http")
    async def read_only(request: Request, call_next: Any) -> Response:
        if request.method in READ_METHODS:
            return await call_next(request)
        if request.method != "POST" or not ACTION_PATH.fullmatch(request.url.path):
            return _error(request, 405, "Method not allowed", f"{request.method} is refused: the console only reads")
        if not same_origin(request):
            return _error(request, 403, "Forbidden", "an action is accepted only from the console's own pages")
        return await call_next(request)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        if error.status_code == 404:
            return _error(request, 404, "Not found", f"nothing at {request.url.path}")
        return _error(request, error.status_code, "Refused", str(error.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, error: RequestValidationError) -> Response:
        fields = ", ".join(".".join(str(part) for part in e["loc"]) for e in error.errors())
        return _error(request, 400, "Bad request", f"invalid or missing: {fields}")

    @app.exception_handler(pages.NotFound)
    async def not_found(request: Request, error: pages.NotFound) -> Response:
        return _error(request, 404, "Not found", str(error))

    @app.exception_handler(InvalidName)
    async def invalid_name(request: Request, error: InvalidName) -> Response:
        return _error(request, 404, "Not found", str(error))

    for refused in (AdapterNotReevaluable, ReevaluationAlreadyStarted):

        @app.exception_handler(refused)
        async def not_started(request: Request, error: Exception) -> Response:
            return _error(request, 409, "Not evaluated again", str(error))

    for upstream in UPSTREAM_ERRORS:

        @app.exception_handler(upstream)
        async def upstream_error(request: Request, error: Exception) -> Response:
            return _error(request, 502, "The deployment did not answer", " ".join(str(error).split())[:500])

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> Response:
        log.exception("console page %s failed", request.url.path)
        return _error(request, 500, "Internal error", f"{type(error).__name__}: see the console's log")

    @app.get("/")
    def home() -> RedirectResponse:
        return RedirectResponse("/executions")

    @app.get("/executions", response_class=HTMLResponse)
    def executions(request: Request) -> HTMLResponse:
        return _page(request, "executions.html", pages.executions(target))

    @app.get("/executions/{machine}/{name}", response_class=HTMLResponse)
    def execution(request: Request, machine: str, name: str) -> HTMLResponse:
        return _page(request, "execution.html", pages.execution(target, machine, name))

    @app.get("/runs", response_class=HTMLResponse)
    def runs(request: Request) -> HTMLResponse:
        return _page(request, "runs.html", pages.runs(target))

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run(request: Request, run_id: str) -> HTMLResponse:
        return _page(request, "run.html", pages.run(target, run_id))

    @app.get("/runs/{run_id}/jobs/{job_id}/log")
    def job_log(run_id: str, job_id: str) -> JSONResponse:
        return JSONResponse(pages.job_log(target, run_id, job_id))

    @app.get("/runs/{run_id}/curve.png")
    def curve(run_id: str) -> Response:
        return Response(pages.curve_png(target, run_id), media_type="image/png")

    @app.get("/registry", response_class=HTMLResponse)
    def registry(request: Request) -> HTMLResponse:
        return _page(request, "registry.html", pages.registry_index(target))

    @app.get("/registry/{base_model_id}", response_class=HTMLResponse)
    def base_model(request: Request, base_model_id: str) -> HTMLResponse:
        return _page(request, "base_model.html", pages.base_model(target, base_model_id))

    @app.get("/registry/{base_model_id}/mazes", response_class=HTMLResponse)
    def compare(
        request: Request, base_model_id: str, challenger: str | None = None, champion: str | None = None
    ) -> HTMLResponse:
        return _page(request, "mazes.html", pages.compare(target, base_model_id, challenger, champion))

    @app.post("/registry/{base_model_id}/{adapter}/evaluate")
    def evaluate(base_model_id: str, adapter: str) -> RedirectResponse:
        name = pages.reevaluate(target, base_model_id, adapter)
        return RedirectResponse(f"/executions/evaluation/{name}", status_code=303)

    @app.get("/play", response_class=HTMLResponse)
    def play(request: Request, model: str, seed: int = 0, eval_set: str | None = None) -> HTMLResponse:
        return _page(request, "play.html", pages.play(target, model, seed, eval_set))

    return app
