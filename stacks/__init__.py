"""CDK: one construct per capability, composed in one thin stack (`dispatch_stack.SiteDispatchStack`)."""
