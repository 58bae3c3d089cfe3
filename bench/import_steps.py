"""Imports in steps against a step-less run of the same file (issue 17): each invocation a fresh process (a cold
Lambda environment) given the function's timeout as its deadline, run until the import commits. Prints and returns
per invocation its outcome, time and peak RSS; the stepped total against the step-less one is the checkpoint
overhead. Then ten new posts imported into the site that now holds the whole file: the memory a small import needs in
a large site (the site is stored in pages: the merge reads the key index, 16 bytes a post, and the pages it touches)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sitedispatch.domain.settings import Settings
from sitedispatch.local.synthetic import write_wxr

STEP_LESS = {"import_step_items": 10**9, "import_step_s": 10**6}


def _invocations(env: dict[str, str], op_id: str, site: str, timeout_s: float, deps: Any) -> list[dict[str, Any]]:
    """Invoke until the operation is terminal: a process per invocation, killed at the timeout as Lambda would."""
    from bench.run import child_report

    runs = []
    for _ in range(200):
        started = time.perf_counter()
        try:
            report = child_report(env, "bench.import_worker", op_id, site, str(timeout_s), timeout=timeout_s + 5)
        except subprocess.TimeoutExpired:
            report = {"outcome": "killed_at_timeout"}
        report["wall_s"] = round(time.perf_counter() - started, 2)
        report.pop("summary", None)
        runs.append(report)
        op = deps.operations.get(op_id)
        if op is not None and op.status.terminal:
            break
    return runs


def measure(workdir: Path, megabytes: int, timeout_s: float) -> dict[str, Any]:
    from bench.run import measuring_runtime, present

    out: dict[str, Any] = {"wxr_mb": megabytes, "function_timeout_s": timeout_s}
    with tempfile.TemporaryDirectory() as tmp:
        wxr = Path(tmp) / "big.xml"
        counts = write_wxr(wxr, target_bytes=megabytes * 1024 * 1024, seed=megabytes)
        small = Path(tmp) / "ten.xml"
        write_wxr(small, posts=10, seed=megabytes + 1, first_id=1001 + counts["posts"])  # ten new posts
        out["posts"] = counts["posts"]
        for name, policy in (("step_less", STEP_LESS), ("stepped", {})):
            with measuring_runtime(workdir / f"steps-{name}") as (_, env, deps):
                # no worker runs: this benchmark's processes are the invocations
                site = f"steps-{name.replace('_', '-')}"
                child_env = {**env, **{Settings.env_name(k): str(v) for k, v in policy.items()}}
                provision = deps.submitter().submit(
                    kind="provision", site_id=site, principal="bench", params={"title": "B", "admin_email": "b@b.co"}
                )
                _invocations(child_env, provision.operation.operation_id, site, 900, deps)
                assert present(deps.sites.get(site)).head_version == 1, "the site was not provisioned"
                submitter = deps.submitter()
                op = submitter.submit(
                    kind="import", site_id=site, principal="bench", params=submitter.stage_upload(site, wxr, "bench")
                ).operation
                timeout = 900 if name == "step_less" else timeout_s
                runs = _invocations(child_env, op.operation_id, site, timeout, deps)
                final = present(deps.operations.get(op.operation_id))
                commit = present(deps.commits.get(op.operation_id))
                out[name] = {
                    "status": final.status.value,
                    "attempts": final.attempt,
                    "invocations": len(runs),
                    "steps": commit.summary.get("steps"),
                    "seconds": round(sum(r["wall_s"] for r in runs), 1),
                    "max_peak_rss_mb": max(r.get("peak_rss_mb", 0) for r in runs),
                    "runs": runs,
                }
                print(
                    f"import {megabytes} MB ({counts['posts']} posts), {name}: {final.status.value} after "
                    f"{len(runs)} invocation(s), {final.attempt} attempt(s), {out[name]['seconds']} s, peak RSS "
                    f"{out[name]['max_peak_rss_mb']} MB per invocation at most",
                    flush=True,
                )
                if name == "stepped":
                    ten = submitter.submit(
                        kind="import",
                        site_id=site,
                        principal="bench",
                        params=submitter.stage_upload(site, small, "bench"),
                    ).operation
                    [into] = _invocations(child_env, ten.operation_id, site, timeout_s, deps)
                    out["ten_posts_into_the_site"] = into
                    print(
                        f"ten posts into that {counts['posts']}-post site: {into['wall_s']} s, peak RSS "
                        f"{into.get('peak_rss_mb')} MB",
                        flush=True,
                    )
    out["overhead_ratio"] = round(out["stepped"]["seconds"] / out["step_less"]["seconds"], 3)
    print(f"stepped / step-less time: {out['overhead_ratio']}", flush=True)
    return out


if __name__ == "__main__":
    import json

    from bench.run import RESULTS, scoped_environ

    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    with scoped_environ(), tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), mb, timeout)
    (RESULTS / "import-steps.json").write_text(json.dumps(result, indent=2))
