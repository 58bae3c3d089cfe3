"""Events on their way out: the events worker (feed places, the bus) and the feed's reader."""
