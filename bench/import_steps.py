"""Imports in steps against a step-less run of the same file (issue 17): each invocation a fresh process (a cold
Lambda environment) given the function's timeout as its deadline, run until the import commits. Prints and returns
per invocation its outcome, time and peak RSS; the stepped total against the step-less one is the checkpoint
overhead. Then ten new posts imported into the site that now holds the whole file: the memory a small import needs in
a large site (the site is stored in pages: the merge reads the key index, 16 bytes a post, and the pages it touches)."""

from __future__ import annotations

import json
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
                timeout = 3600 if name == "step_less" else timeout_s  # the reference run: one pass, whatever it takes
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


def _large_revision(store: Any, frame: Any, posts: int) -> str:
    """A revision of `frame` plus `posts` synthetic posts (ids from 10,000), written as pages straight into the
    site's content (one shared body: an import into it reads no other body), with its key index."""
    from sitedispatch.drivers.reference import content
    from sitedispatch.drivers.reference.content import PostBody, PostRef
    from sitedispatch.drivers.reference.store import KeyIndex, key_hash

    body = store.put_body(PostBody(content="<p>synthetic</p>"))
    refs, pairs, page, number = [], [], {}, None
    base_posts = {p.id: p.canonical_bytes() for p in frame.posts}
    for post_id in [*sorted(base_posts), *range(10_000, 10_000 + posts)]:
        if number is not None and post_id // content.PAGE_IDS != number:
            refs.append(store.put_page(number, page))
            page = {}
        number = post_id // content.PAGE_IDS
        if post_id in base_posts:
            data = base_posts[post_id]
            guid, source = frame.posts[[p.id for p in frame.posts].index(post_id)].guid, 0
        else:
            guid, source = f"https://large.example/?p={post_id}", post_id
            data = PostRef(
                id=post_id,
                guid=guid,
                title=f"Post {post_id}",
                slug=f"post-{post_id}",
                date_gmt="2024-01-01 10:00:00",
                modified_gmt="2024-01-01 10:00:00",
                term_ids=(1,),
                summary="synthetic",
                body=body,
                source_id=post_id,
            ).canonical_bytes()
        page[post_id] = data
        pairs.append((key_hash(guid, source), post_id))
    refs.append(store.put_page(number, page))
    index = store.put_key_index(KeyIndex.of(pairs))
    return str(store.put_frame(frame.model_copy(update={"posts": (), "pages": tuple(refs), "index": index})))


def publish_sampled(env: dict[str, str], deps: Any, site: str, revision_id: str, whole: bool) -> dict[str, Any]:
    """The head's publication, step by step in fresh processes: the plan step (it builds the route plan, reading
    every page once), then a sample of chunks of each kind (the feed and sitemap index; the first, a middle and the
    last listing chunk; the first, a middle and the last content page's chunk). Rendering every chunk of 300,000
    posts on moto takes most of an hour here; the whole is estimated from the sample, per kind."""
    from bench.run import child_report
    from sitedispatch.drivers.reference.plan import plan_key

    seq = next(
        n
        for n in range(20, 0, -1)
        if (p := deps.publications.get(site, n)) is not None and p.revision_id == revision_id
    )
    planned = child_report(env, "bench.publish_step", site, str(seq), "plan")
    document = json.loads(deps.blobs.get(plan_key(site, revision_id)))
    kinds: dict[str, list[int]] = {}
    for number, chunk in enumerate(document["chunks"]):
        kinds.setdefault(chunk["kind"], []).append(number)
    samples: dict[str, list[dict[str, Any]]] = {}
    for kind, numbers in kinds.items():
        for number in sorted({numbers[0], numbers[len(numbers) // 2], numbers[-1]}):
            report = child_report(env, "bench.publish_step", site, str(seq), str(number))
            report["routes"] = document["chunks"][number]["routes"]
            samples.setdefault(kind, []).append(report)
    estimate = sum(
        len(kinds[kind]) * sum(r["seconds"] for r in reports) / len(reports) for kind, reports in samples.items()
    )
    peak = max([planned["peak_rss_mb"], *(r["peak_rss_mb"] for rs in samples.values() for r in rs)])
    out = {
        "routes": document["route_count"],
        "chunks": {kind: len(numbers) for kind, numbers in kinds.items()},
        "plan_step": planned,
        "samples": samples,
        "estimated_chunk_seconds_one_worker": round(estimate, 1),
        "peak_rss_mb_of_any_step": peak,
    }
    if whole:  # the rest of the chunks and the fan-in, in one process: the publication goes live
        from sitedispatch.publication.live import receipt_key

        out["rest"] = child_report(env, "bench.publish_step", site, str(seq), "rest", timeout=7200)
        receipt = json.loads(deps.blobs.get(receipt_key(site, revision_id)))
        site_row = deps.sites.get(site)
        out["live"] = site_row is not None and site_row.live_revision == revision_id
        out["receipt"] = {k: receipt[k] for k in ("route_count", "bytes")} | {"chunks": len(receipt["chunks"])}
        print(f"the rest in one process: {out['rest']}, live: {out['live']}, receipt {out['receipt']}", flush=True)
    print(
        f"publication of that site: {out['routes']} routes in {sum(out['chunks'].values())} chunks {out['chunks']}; "
        f"plan step {planned['seconds']} s, {planned['peak_rss_mb']} MB; sampled chunks "
        + ", ".join(
            f"{k} {max(r['peak_rss_mb'] for r in rs)} MB {max(r['seconds'] for r in rs)} s" for k, rs in samples.items()
        )
        + f"; every chunk on one worker ~{out['estimated_chunk_seconds_one_worker']} s",
        flush=True,
    )
    return out


def ten_into_large_site(workdir: Path, posts: int, timeout_s: float, whole: bool = False) -> dict[str, Any]:
    """Ten new posts imported into a site that already holds `posts` (its revision restored from pages written
    straight into its content: importing 300,000 posts on moto first would take most of an hour here)."""
    from bench.run import measuring_runtime, present
    from sitedispatch.drivers.reference.store import ContentStore

    with tempfile.TemporaryDirectory() as tmp, measuring_runtime(workdir / "large-site") as (_, env, deps):
        site = "large-site"
        submitter = deps.submitter()
        provision = submitter.submit(
            kind="provision", site_id=site, principal="bench", params={"title": "L", "admin_email": "l@l.co"}
        )
        _invocations(env, provision.operation.operation_id, site, 900, deps)
        store = ContentStore(deps.blobs, site)
        started = time.perf_counter()
        revision = _large_revision(
            store, store.stored_manifest(present(present(deps.sites.get(site)).head_revision)), posts
        )
        built_s = round(time.perf_counter() - started, 1)
        restore = submitter.submit(
            kind="recover", site_id=site, principal="bench", params={"revision_id": revision, "mode": "restore"}
        )
        [restored] = _invocations(env, restore.operation.operation_id, site, 900, deps)
        small = Path(tmp) / "ten.xml"
        write_wxr(small, posts=10, seed=3, first_id=1_000_000)
        ten = submitter.submit(
            kind="import", site_id=site, principal="bench", params=submitter.stage_upload(site, small, "bench")
        ).operation
        [into] = _invocations(env, ten.operation_id, site, timeout_s, deps)
        head = store.stored_manifest(present(present(deps.sites.get(site)).head_revision))
        publication = publish_sampled(env, deps, site, present(present(deps.sites.get(site)).head_revision), whole)
        out = {
            "site_posts": posts,
            "pages": len(head.pages),
            "built_s": built_s,
            "restore": restored,
            "ten_posts": into,
            "posts_after": head.post_count,
            "publication": publication,
        }
    print(
        f"ten posts into a {posts}-post site ({out['pages']} pages): {into['outcome']} in {into['wall_s']} s, "
        f"peak RSS {into.get('peak_rss_mb')} MB; {out['posts_after']} posts after",
        flush=True,
    )
    return out


if __name__ == "__main__":
    from bench.run import RESULTS, scoped_environ

    if sys.argv[1:2] == ["--large-site"]:
        posts = int(sys.argv[2]) if len(sys.argv) > 2 else 300_000
        whole = "--whole-publication" in sys.argv  # every chunk rendered (most of an hour at 300,000 posts)
        with scoped_environ(), tempfile.TemporaryDirectory() as tmp:
            result = ten_into_large_site(Path(tmp), posts, 120.0, whole)
        name = "import-large-site-whole-publication.json" if whole else "import-large-site.json"
        (RESULTS / name).write_text(json.dumps(result, indent=2))
        sys.exit(0)
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    with scoped_environ(), tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), mb, timeout)
    (RESULTS / "import-steps.json").write_text(json.dumps(result, indent=2))
