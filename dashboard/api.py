"""The dashboard's HTTP API, on the Dash app's Flask server (for scripts, large files and `stallscope upload`).

    POST   /api/traces                 multipart field ``file`` -> 201 {id, url, status}
    GET    /api/traces                 [{id, name, uploaded_at, size_bytes, status, summary, ...}]
    GET    /api/traces/<id>            one entry (status and progress while it is analysed)
    GET    /api/traces/<id>/analysis   the analysis JSON (schema stallscope.analysis/3)
    GET    /api/traces/<id>/annotated  the trace with the analysis as extra tracks (gzip), for Perfetto UI
    DELETE /api/traces/<id>            204
    POST   /api/traces/<id>/pin        the entry, pinned: kept when the store is over its limit
    DELETE /api/traces/<id>/pin        the entry, unpinned
    GET    /api/store                  {usage_bytes, limit_bytes}
    GET    /api/runs/<run_id>          a long run's captures in wall-clock order, flagged (``dashboard.runs``);
                                       ``?threshold=0.2``: the step-time rise that flags a capture

A dashboard started with a token answers 401 to any request without it (``stallscope.dashboard.auth``).
An upload the store cannot make room for (everything older pinned or being analysed) is answered 507.

Every error is a JSON object ``{"error": "<one line>"}`` with a 4xx status (5xx only for a corrupt entry or
a bug), never a traceback or an HTML page. Ids are checked against the store's id shape before any file is
touched; the uploaded file name is kept as display text only.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Flask, Response, jsonify, request, send_file
from werkzeug.exceptions import HTTPException

from stallscope.dashboard import runs
from stallscope.dashboard.services import Services
from stallscope.dashboard.store import CorruptEntry, NotReady, StoreFull, TooLarge, UnknownTrace
from stallscope.dashboard.unpack import BadUpload

log = logging.getLogger("stallscope.dashboard")


def request_limit(max_upload_bytes: int) -> int:
    """Flask's ``MAX_CONTENT_LENGTH``: the upload limit plus room for a Dash upload's base64 (4/3) and the
    multipart envelope. The exact limit is enforced on the decoded bytes by the store."""
    return max_upload_bytes * 4 // 3 + (1 << 20)


def register_api(server: Flask, services: Services) -> None:
    server.config["MAX_CONTENT_LENGTH"] = request_limit(services.max_upload_bytes)
    server.register_blueprint(_blueprint(services))

    @server.errorhandler(413)
    def too_large(_exc: HTTPException) -> tuple[Response, int]:
        mb = services.max_upload_bytes // (1 << 20)
        return jsonify(error=f"upload is larger than the limit of {mb} MB"), 413


def _blueprint(services: Services) -> Blueprint:
    api = Blueprint("stallscope_api", __name__, url_prefix="/api")
    store = services.store

    @api.post("/traces")
    def upload() -> tuple[Response, int]:
        file = request.files.get("file")
        if file is None:
            return jsonify(error="send the trace as multipart form field 'file'"), 400
        name = request.form.get("name") or file.filename or "trace"
        # 140 characters: a capture's "run:<run id>" whole (a run id is at most 128, ``runs.RUN_ID_RE``)
        tags = tuple(t.strip()[:140] for t in request.form.get("tags", "").split(",") if t.strip())[:16]
        entry = store.add(name, file.stream, services.max_upload_bytes, tags)
        if services.worker is not None:
            services.worker.submit(entry.id)
        url = f"{request.host_url.rstrip('/')}/trace/{entry.id}"
        return jsonify(id=entry.id, url=url, status=entry.status.value), 201

    @api.get("/traces")
    def listing() -> Response:
        return jsonify([e.to_json() for e in store.entries()])

    @api.get("/traces/<trace_id>")
    def one(trace_id: str) -> Response:
        return jsonify(store.get(trace_id).to_json())

    @api.get("/traces/<trace_id>/analysis")
    def analysis(trace_id: str) -> Response:
        return jsonify(store.analysis(trace_id))

    @api.get("/traces/<trace_id>/annotated")
    def annotated(trace_id: str) -> Response:
        from stallscope.analyzer.document.annotate import annotated_name, awaited_by_sync

        path = store.annotated(trace_id, lambda: awaited_by_sync(services.live.get(trace_id)))
        name = annotated_name(store.get(trace_id).name)
        return send_file(path, mimetype="application/gzip", as_attachment=True, download_name=name)

    @api.delete("/traces/<trace_id>")
    def delete(trace_id: str) -> tuple[str, int]:
        store.delete(trace_id)
        return "", 204

    @api.post("/traces/<trace_id>/pin")
    def pin(trace_id: str) -> Response:
        return jsonify(store.pin(trace_id).to_json())

    @api.delete("/traces/<trace_id>/pin")
    def unpin(trace_id: str) -> Response:
        return jsonify(store.pin(trace_id, pinned=False).to_json())

    @api.get("/store")
    def usage() -> Response:
        return jsonify(usage_bytes=store.usage(), limit_bytes=store.limit_bytes)

    @api.get("/runs/<run_id>")
    def run(run_id: str) -> Response:
        threshold = runs.parse_threshold(request.args.get("threshold"))
        return jsonify(runs.history(store.entries(), runs.check_run_id(run_id), threshold).to_json())

    @api.route("/", defaults={"rest": ""}, methods=["GET", "POST", "DELETE", "PUT", "PATCH"])
    @api.route("/<path:rest>", methods=["GET", "POST", "DELETE", "PUT", "PATCH"])
    def nothing(rest: str) -> tuple[Response, int]:
        """Any other /api URL (the app's catch-all page route must not answer it with HTML)."""
        if rest.startswith("runs/"):
            return jsonify(error=str(runs.BadRunId.shape())), 400
        if rest.startswith("traces/"):
            return jsonify(error=f"no trace with id {rest[7:47]!r}"), 404
        return jsonify(error="no such API route"), 404

    _errors(api, services)
    return api


def _errors(api: Blueprint, services: Services) -> None:
    """Every error of an /api route as one line of JSON with its status."""

    @api.errorhandler(UnknownTrace)
    def unknown(exc: UnknownTrace) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 404

    @api.errorhandler(runs.UnknownRun)
    def unknown_run(exc: runs.UnknownRun) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 404

    @api.errorhandler(runs.BadRunId)
    @api.errorhandler(runs.BadThreshold)
    def bad_run(exc: runs.RunError) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 400

    @api.errorhandler(TooLarge)
    def too_large(exc: TooLarge) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 413

    @api.errorhandler(StoreFull)
    def full(exc: StoreFull) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 507

    @api.errorhandler(BadUpload)
    def bad_upload(exc: BadUpload) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 400

    @api.errorhandler(NotReady)
    def not_ready(exc: NotReady) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 409

    @api.errorhandler(CorruptEntry)
    def corrupt(exc: CorruptEntry) -> tuple[Response, int]:
        return jsonify(error=str(exc)), 500

    @api.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        code = exc.code or 500
        if code == 413:
            mb = services.max_upload_bytes // (1 << 20)
            return jsonify(error=f"upload is larger than the limit of {mb} MB"), 413
        return jsonify(error=(exc.description or exc.name).splitlines()[0]), code

    @api.errorhandler(Exception)
    def bug(exc: Exception) -> tuple[Response, int]:
        log.exception("API error")  # the traceback goes to the server's log, never to the client
        return jsonify(error=f"internal error ({type(exc).__name__})"), 500
