"""A producer in a process of its own (as a producer is): ten provisions sent to the API at once, as ten concurrent
requests or as one batch; prints their operation ids as JSON. Run by the G1 test through the API, without the test
process's coverage tracing, which would spread the requests it sends at once.

    python -m tests.acceptance.producer URL requests|batch one|many SITE...
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from sitedispatch.client import ApiClient
from tests.factories import PROVISION


def submitted(url: str, how: str, many: bool, sites: list[str]) -> list[str]:
    if how == "requests":
        clients = [ApiClient(url, identity=f"producer-{n}" if many else "producer") for n in range(len(sites))]
        body = {"kind": "provision", "params": PROVISION}
        with ThreadPoolExecutor(len(sites)) as pool:
            replies = list(
                pool.map(lambda c, s: c.call("POST", "/operations", body={**body, "site_id": s}), clients, sites)
            )
        return [reply["operation_id"] for reply in replies]
    items = [
        {"kind": "provision", "site_id": site, "params": PROVISION, "idempotency_key": site}
        | ({"tenant": f"customer-{n}"} if many else {})
        for n, site in enumerate(sites)
    ]
    answer = ApiClient(url, identity="control-plane").call("POST", "/operations/batch", body={"items": items})
    if [item["status"] for item in answer["items"]] != [202] * len(sites):
        raise SystemExit(f"not every item accepted: {answer}")
    return [item["operation"]["operation_id"] for item in answer["items"]]


if __name__ == "__main__":
    url, how, who, *sites = sys.argv[1:]
    print(json.dumps(submitted(url, how, who == "many", sites)))
