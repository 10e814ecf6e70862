"""Fuzz a running Exosuit API over HTTP from its own OpenAPI document (GET /openapi.json).

    .venv/bin/python bench/fuzz.py --url http://127.0.0.1:6666            # 10,000 requests
    .venv/bin/python bench/fuzz.py --url URL --requests 50000 --seed 7 --json out.json
    make fuzz URL=http://127.0.0.1:6666 ARGS="--requests 20000"

The campaign of tests/api/fuzz_campaign.py, longer: it seeds a world of its own through the
API (a host reported through the agent API, a profile, ARQs, an image, a program: names
ending in a tag of this run), then sends cases of every operation, following the document
and breaking it, round after round (a new Hypothesis seed each round) until --requests
have been sent. It prints the counts by status, by operation, and every failure (a 5xx,
a broken connection, a status, content type or body the document does not describe, a
2xx for a body the document refuses) with a curl command that reproduces it. Exit status
1 when there is any failure. The server must run with noauth (``exosuit serve``, or
``[api] auth_strategy = noauth``), or pass ``--header X-Auth-Token:TOKEN``.
doc/reliability.md, "Fuzzing", has the figures of a run and how to start the servers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid

import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.api import fuzz_campaign as campaign  # noqa: E402


def _sender(session: requests.Session, url: str) -> campaign.Send:
    def send(method, path, body, headers):
        kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
        r = session.request(method, url + path, headers=headers, timeout=120, **kwargs)
        is_json = r.headers.get("Content-Type", "").startswith("application/json")
        return r.status_code, (r.json() if is_json and r.content else None)

    return send


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the API's root, e.g. http://127.0.0.1:6666")
    parser.add_argument("--requests", type=int, default=10_000, help="how many (10000)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis' seed of round 1 (0)")
    parser.add_argument(
        "--budget", type=float, default=30.0, help="seconds per operation, mode and round (30)"
    )
    parser.add_argument(
        "--header", action="append", default=[], help="NAME:VALUE sent with every request"
    )
    parser.add_argument("--json", help="write the counts and failures to this file")
    args = parser.parse_args(argv)

    url = args.url.rstrip("/")
    headers = dict(h.split(":", 1) for h in args.header)
    session = requests.Session()
    session.headers.update(headers)
    started = time.monotonic()
    known = campaign.seed(_sender(session, url), tag="-" + uuid.uuid4().hex[:6])
    schema = campaign.load(url=url)
    operations = len(list(schema.get_all_operations()))
    # Enough cases per operation and mode for the whole count in one round; operations
    # with few distinct cases (no parameters) run out early, and later rounds make it up.
    examples = max(1, math.ceil(args.requests / (2 * operations)))
    report = campaign.Report()
    rounds = 0
    while report.requests < args.requests:
        rounds += 1
        run = campaign.Campaign(
            schema,
            known,
            examples=examples,
            budget=args.budget,
            seed=args.seed + rounds - 1,
            call=lambda case: case.call(base_url=url, session=session, timeout=120),
            max_requests=args.requests - report.requests,
        )
        sent = run.run()
        report.statuses.update(sent.statuses)
        report.failures.extend(sent.failures)
        print(f"round {rounds}: {sent.requests} requests, {len(sent.failures)} failures")
        if sent.requests == 0:
            break
    seconds = time.monotonic() - started
    _print(report, seconds, rounds, url)
    if args.json:
        _write(args.json, report, seconds, rounds, url, args)
    return 1 if report.failures else 0


def _print(report: campaign.Report, seconds: float, rounds: int, url: str) -> None:
    print(f"\n{url}: {report.requests} requests in {seconds:.0f} s ({rounds} rounds)")
    print("by status: " + ", ".join(f"{s}: {n}" for s, n in report.by_status().items()))
    per_operation: dict[str, dict[int, int]] = {}
    for (label, status), n in sorted(report.statuses.items()):
        per_operation.setdefault(label, {})[status] = n
    for label, counts in per_operation.items():
        print(f"  {label:58} " + " ".join(f"{s}:{n}" for s, n in sorted(counts.items())))
    server = report.server_errors()
    print(f"\n5xx: {len(server)}; failures: {len(report.failures)}")
    for failure in report.failures:
        print(failure)


def _write(path, report, seconds, rounds, url, args) -> None:
    with open(path, "w") as f:
        json.dump(
            {
                "url": url,
                "requests": report.requests,
                "seconds": round(seconds, 1),
                "rounds": rounds,
                "seed": args.seed,
                "by_status": report.by_status(),
                "by_operation": {
                    f"{label} {status}": n for (label, status), n in report.statuses.items()
                },
                "failures": [vars(f) for f in report.failures],
            },
            f,
            indent=2,
        )


if __name__ == "__main__":
    sys.exit(main())
