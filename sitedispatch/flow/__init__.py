"""Flow control: admission, fairness keys, sharded counters and what an operation holds, queue shares, pace, minute
counts, the retry budget and delay estimates. DynamoDB's side is `sitedispatch.aws.flow`."""
