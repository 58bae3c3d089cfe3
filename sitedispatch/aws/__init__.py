"""AWS adapters of the core's ports: the only package that imports boto3 or pynamodb."""
