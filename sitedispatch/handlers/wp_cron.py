"""`wp_cron`: run due events and publish scheduled (`future`) posts whose date has passed, as WordPress's cron."""

from __future__ import annotations

from ..context import HandlerContext
from ..errors import PermanentError
from ..schemas import WpCronInput
from ..wordpress.content import ScheduledEvent, gmt
from . import Mutation

RECURRENCE_S = {"hourly": 3600, "twicedaily": 43200, "daily": 86400, "weekly": 604800}


def wp_cron(ctx: HandlerContext, payload: WpCronInput) -> Mutation:
    head = ctx.head_manifest()
    if head is None:
        raise PermanentError(f"site {ctx.site.site_id} is not provisioned", code="not_provisioned")
    as_of = payload.due_minute * 60 if payload.due_minute is not None else int(ctx.operation.created_at)
    now = gmt(as_of)
    published = []
    posts = []
    for post in head.posts:
        if post.status == "future" and post.date_gmt <= now:
            post = post.model_copy(update={"status": "publish"})
            published.append(post.id)
        posts.append(post)
    ran: list[str] = []
    events: list[ScheduledEvent] = []
    for event in head.events:
        if event.timestamp > as_of:
            events.append(event)
            continue
        ran.append(event.hook)
        interval = RECURRENCE_S.get(event.recurrence or "")
        if interval:  # recurring: next run after now; one-off: done
            missed = (as_of - event.timestamp) // interval + 1
            events.append(event.model_copy(update={"timestamp": event.timestamp + missed * interval}))
    manifest = head.model_copy(update={"posts": tuple(posts), "events": tuple(events)}).normalised()
    return Mutation(manifest=manifest, summary={"as_of": now, "published_posts": published, "ran_events": ran},
                    publish=bool(published or ran))  # events change only when some ran
