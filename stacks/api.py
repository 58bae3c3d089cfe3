"""DispatchApi: the HTTP API, the only way in. API Gateway (HTTP API) authorizes every route with IAM (SigV4) and
hands the verified caller to the `api` function; the routes are the ones the function's OpenAPI document lists.

Why an HTTP API and not a REST API: IAM authorization, per-route IAM resources (`execute-api:Invoke` on
`api/$default/METHOD/path`) and the Lambda proxy integration are all an HTTP API needs here, at less than a third of
the price per request ($1.00 against $3.50 per million) and with lower added latency. What a REST API would add and
this does not use: request validation at the gateway (the function validates, with the same pydantic models that
generate the OpenAPI document), usage plans and API keys (IAM identities are the principals), WAF and resource
policies (nothing here is public: every request must be signed by an identity of this account or one it trusts).
"""

from __future__ import annotations

import json
import re

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from sitedispatch.api.app import OPERATOR_ROUTES, routes
from sitedispatch.operator.access import READS

THROTTLE_RATE = 500  # requests per second across the API (the account's default is 10,000)
THROTTLE_BURST = 1000
ACCESS_LOG = {  # one JSON line per request, with the identity API Gateway verified
    "requestId": "$context.requestId",
    "caller": "$context.identity.userArn",
    "route": "$context.routeKey",
    "status": "$context.status",
    "latencyMs": "$context.responseLatency",
    "integrationError": "$context.integrationErrorMessage",
}


def invoke_resource(api: apigw.HttpApi, method: str, path: str) -> str:
    """The `execute-api:Invoke` resource of one route: path parameters become wildcards."""
    return api.arn_for_execute_api(method, re.sub(r"\{[^}]+\}", "*", path), "$default")


class DispatchApi(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, function: lambda_.IFunction) -> None:
        super().__init__(scope, construct_id)
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            description="sitedispatch: submit, follow and operate dispatched site operations (IAM-signed)",
            default_authorizer=authorizers.HttpIamAuthorizer(),
            create_default_stage=False,
        )
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.THREE_MONTHS, removal_policy=RemovalPolicy.RETAIN
        )
        self.stage = apigw.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigw.ThrottleSettings(rate_limit=THROTTLE_RATE, burst_limit=THROTTLE_BURST),
        )
        stage = self.stage.node.default_child
        assert isinstance(stage, apigw.CfnStage)
        stage.access_log_settings = apigw.CfnStage.AccessLogSettingsProperty(
            destination_arn=self.access_logs.log_group_arn, format=json.dumps(ACCESS_LOG)
        )
        integration = integrations.HttpLambdaIntegration(
            "Function",
            function,
            timeout=Duration.seconds(29),  # the most an HTTP API waits for its integration
            payload_format_version=apigw.PayloadFormatVersion.VERSION_2_0,
        )
        self.routes = routes()
        for method, path in self.routes:
            self.http_api.add_routes(path=path, methods=[apigw.HttpMethod(method)], integration=integration)
        stack = Stack.of(self)
        self.url = f"https://{self.http_api.api_id}.execute-api.{stack.region}.{stack.url_suffix}"

    def invoke_resources(self, *, operators: bool, reads_only: bool = False) -> list[str]:
        """What a producer (every route but the operators'), an operator (every route) or a reader (every read)
        may invoke."""
        return [
            invoke_resource(self.http_api, method, path)
            for method, path in self.routes
            if (operators or (method, path) not in OPERATOR_ROUTES) and (not reads_only or method in READS)
        ]
