"""Dependencies through the HTTP API as deployed: operators set caps and rates, pause and resume; a site's owner
names what its site shares; a principal sees only what its sites name, and of it only its own; all audited."""

from __future__ import annotations

from tests.conftest import Cloud, pump
from tests.integration.conftest import as_

SETTINGS = {
    "max_running": 4,
    "rates": [{"kind": "publish", "limit": 20, "period_s": 60, "burst": 5}],
    "reason": "the cluster takes 4 writers",
}


def test_operators_set_and_pause_a_dependency_its_sites_owners_see_it_and_no_one_else(api: str, cloud: Cloud) -> None:
    operator, a, b = as_(api, "operator"), as_(api, "tenant-a"), as_(api, "tenant-b")
    refused = a.request("PUT", "/dependencies/db:a", body=SETTINGS)
    assert refused.status == 403 and "only operators" in refused.body["message"]
    set_ = operator.call("PUT", "/dependencies/db:a", body=SETTINGS)
    assert set_["max_running"] == 4 and set_["rates"][0]["describe"] == "20 per minute (burst 5, publish)"
    assert set_["state"] == "closed" and set_["settings_by"] == "operator"

    site = a.call(
        "POST", "/sites", body={"site_id": "dep-a1", "driver": "reference", "dependencies": ["db:a", "php:pool-1"]}
    )
    assert site["dependencies"] == ["db:a", "php:pool-1"]
    b.call("POST", "/sites", body={"site_id": "dep-b1", "driver": "reference", "dependencies": ["db:a"]})
    seen = a.call("GET", "/dependencies/db:a")
    assert seen["sites"] == ["dep-a1"] and seen["site_count"] == 1  # not tenant-b's site
    assert seen["principals"] == [] and seen["settings_by"] is None  # who else shares it is not shown
    assert [d["dependency_id"] for d in a.call("GET", "/dependencies")] == ["db:a", "php:pool-1"]
    whole = operator.call("GET", "/dependencies/db:a")
    assert whole["sites"] == ["dep-a1", "dep-b1"] and whole["principals"] == ["tenant-a", "tenant-b"]
    assert as_(api, "tenant-c").request("GET", "/dependencies/db:a").status == 404

    # an operator's pause, told to both principals; resumed
    assert operator.request("POST", "/dependencies/db:a/pause", body={}).status == 422  # a reason is required
    paused = operator.call("POST", "/dependencies/db:a/pause", body={"reason": "cluster maintenance"})
    assert paused["state"] == "paused" and paused["reason"] == "cluster maintenance"
    assert a.request("POST", "/dependencies/db:a/resume", body={"reason": "mine"}).status == 403
    provision = {"kind": "provision", "site_id": "dep-a1", "params": {"title": "A", "admin_email": "a@a.example"}}
    held = a.call("POST", "/operations", body=provision)["operation_id"]
    pump(cloud)
    waiting = a.call("GET", f"/operations/{held}")
    assert waiting["status"] == "queued" and waiting["attempt"] == 0, waiting
    assert waiting["waiting_because"] == "dependency db:a paused: cluster maintenance"
    assert waiting["estimated_delay_s"] is None  # until an operator resumes it, as a paused site
    for client, principal in ((a, "tenant-a"), (b, "tenant-b")):
        told = [e for e in client.call("GET", "/events")["events"] if e["type"] == "dependency.paused"]
        assert [(e["principal"], e["dependency_id"], e["by"]) for e in told] == [(principal, "db:a", "operator")]
    assert operator.call("POST", "/dependencies/db:a/resume", body={"reason": "done"})["state"] == "closed"
    assert a.call("GET", f"/operations/{held}")["waiting_because"] is None
    rows = {r["dependency_id"]: r for r in a.call("GET", "/status")["dependencies"]}
    assert set(rows) == {"db:a", "php:pool-1"} and rows["db:a"]["max_running"] == 4
    assert rows["db:a"]["rates"] == ["20 per minute (burst 5, publish)"] and rows["db:a"]["state"] == "closed"
    assert as_(api, "tenant-c").call("GET", "/status")["dependencies"] == []

    # the owner changes what its site names: it no longer sees db:a
    changed = a.call("PUT", "/sites/dep-a1/dependencies", body={"dependencies": ["php:pool-1"], "reason": "moved"})
    assert changed["dependencies"] == ["php:pool-1"]
    assert a.request("GET", "/dependencies/db:a").status == 404
    assert b.request("PUT", "/sites/dep-a1/dependencies", body={"dependencies": [], "reason": "x"}).status == 404
    cleared = operator.call("DELETE", "/dependencies/db:a", query={"reason": "unlimited again"})
    assert cleared["max_running"] is None and cleared["rates"] == []

    actions = [(e["action"], e["outcome"]) for e in operator.call("GET", "/audit") if "dependenc" in e["action"]]
    assert ("dependency", "denied") in actions and ("pause-dependency", "ok") in actions
    assert ("site-dependencies", "ok") in actions and ("site-dependencies", "denied") in actions


def test_a_dependency_id_or_a_rate_that_is_wrong_is_one_line_naming_the_field(api: str) -> None:
    operator, a = as_(api, "operator"), as_(api, "tenant-a")
    a.call("POST", "/sites", body={"site_id": "dep-a2", "driver": "reference"})
    too_many = a.request(
        "PUT", "/sites/dep-a2/dependencies", body={"dependencies": [f"db:c{n}" for n in range(5)], "reason": "r"}
    )
    assert too_many.status == 422 and too_many.body["field"] == "dependencies"
    bad = a.request("PUT", "/sites/dep-a2/dependencies", body={"dependencies": ["DB#1"], "reason": "r"})
    assert bad.status == 422 and bad.body["field"] == "dependencies.0"
    fast = operator.request(
        "PUT", "/dependencies/db:a", body={"rates": [{"limit": 1000, "period_s": 1}], "reason": "r"}
    )
    assert fast.status == 422 and fast.body["field"] == "rates" and "starts a second" in fast.body["message"]
    twice = {"rates": [{"limit": 1, "period_s": 1}, {"limit": 2, "period_s": 1}], "reason": "r"}
    assert operator.request("PUT", "/dependencies/db:a", body=twice).body["field"] == "rates"
    assert operator.request("GET", "/dependencies/Not-An-Id").status == 422
    encoded = operator.request("GET", "/dependencies/db%3Aa")  # the colon percent-encoded, as many clients send it
    assert encoded.status == 200 and encoded.body["dependency_id"] == "db:a", encoded


def test_a_rate_on_a_fairness_key_through_quotas_holds_its_next_start_as_deployed(api: str, cloud: Cloud) -> None:
    operator, q = as_(api, "operator"), as_(api, "tenant-q")
    body = {"principal": "tenant-q", "rates": [{"kind": "provision", "limit": 1, "period_s": 3600}], "reason": "r"}
    assert q.request("PUT", "/quotas", body=body).status == 403
    limits = operator.call("PUT", "/quotas", body=body)
    assert limits["rates"] == ["1 per hour (burst 1, provision)"]
    provision = {"title": "Q", "admin_email": "q@q.example"}
    ops = [
        q.call("POST", "/operations", body={"kind": "provision", "site_id": f"rated-{n}", "params": provision})
        for n in range(2)
    ]
    pump(cloud)
    first, second = (q.call("GET", f"/operations/{op['operation_id']}") for op in ops)
    assert first["status"] == "succeeded"
    assert second["status"] == "queued" and second["attempt"] == 0, second
    assert second["waiting_because"].startswith("rate: its start is reserved, in 3")
    assert q.call("GET", "/quotas", query={"principal": "tenant-q"})["rates"] == ["1 per hour (burst 1, provision)"]
    cleared = operator.call("DELETE", "/quotas", query={"principal": "tenant-q", "reason": "done"})
    assert cleared["rates"] == []
