"""Signing in to the console with the admin token and one's name, and signing out, of this browser
or everywhere (``app.console.access`` keeps the session, ``service.console_sessions`` its row)."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from app.console import access
from app.console.blueprint import bp


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> str | BaseResponse | tuple[str, int]:
    error = None
    if request.method == "POST":
        name = (request.form.get("operator") or "").strip()
        if not access.OPERATOR_NAME.fullmatch(name):
            error = "Your name: 1 to 64 letters, digits, spaces or . _ @ -, starting with a letter or digit."
        elif not access.token_matches(request.form.get("token", "")):
            error = "That is not the admin token."
        else:
            access.sign_in(name)
            return redirect(access.safe_next(request.args.get("next")))
        return render_template("console/sign_in.html", error=error), 401 if "token" in error else 422
    return render_template("console/sign_in.html", error=error)


@bp.post("/sign-out")
def sign_out() -> BaseResponse:
    access.sign_out()
    return redirect(url_for("console.sign_in", done="signed_out"))


@bp.post("/sign-out-everywhere")
def sign_out_everywhere() -> BaseResponse:
    access.sign_out_everywhere()
    return redirect(url_for("console.sign_in", done="signed_out_everywhere"))
