"""moto's update-expression validation made cheaper, with the same answers.

Every UpdateItem (alone or in a transaction) deep-copies the expression's tree and walks it with ten processors, twice
for an item that does not exist yet: two thirds of the local cloud's time in a batch submit's transactions. Three
things change, none of them what is answered:
- each processor finds its handler of a node's class once (moto builds its table of node types and tests it with
  an ABC's `isinstance` at every node, for each of the ten processors);
- the tree is copied node by node (its nodes hold their children, their parent and a type name) instead of by
  `deepcopy`'s generic walk;
- the three checks that read only the expression, its attribute names and the table's key (clause counts, overlapping
  paths, a key attribute updated) run once per distinct triple; the checks that read values or the item run every time.
"""

from __future__ import annotations

import importlib
import threading
from copy import deepcopy
from typing import Any

# Distinct (expression, names, key) triples whose expression-only checks passed; a fleet uses a few dozen.
CHECKED_EXPRESSIONS = 4096


def patch_moto_update_validation() -> None:
    import moto.dynamodb.models  # noqa: F401  (imports the validator by name: replaced there too)
    from moto.dynamodb.parsing import validators

    if getattr(validators.UpdateExpressionValidator, "checks_once", False):
        return
    _walk_with_handlers_per_class()
    validator = _validator_checking_expressions_once(validators)
    for module in [*_users_of(validators.UpdateExpressionValidator), validators]:
        module.UpdateExpressionValidator = validator


def _ast_nodes() -> Any:
    """moto's tree module (untyped: mypy reads it as empty)."""
    return importlib.import_module("moto.dynamodb.parsing.ast_nodes")


_IS_NODE: dict[type, bool] = {}
_HANDLERS: dict[tuple[type, type], Any] = {}  # (processor class, node class) -> its function, or None


def _handler(processor: Any, cls: type) -> Any:
    """The function that processes a node of this class (the first in the processor's map the class belongs to, as
    moto's `process` picks), or None. Every map moto builds holds methods of the processor itself."""
    key = (type(processor), cls)
    if key not in _HANDLERS:
        found = [method for node_type, method in processor._processing_map().items() if issubclass(cls, node_type)]
        assert all(method.__self__ is processor for method in found)
        _HANDLERS[key] = found[0].__func__ if found else None
    return _HANDLERS[key]


def _walk_with_handlers_per_class() -> None:
    """moto's depth-first walk, bottom up, with its class tests (an ABC's `isinstance`) answered once per class."""
    DepthFirstTraverser, Node = _ast_nodes().DepthFirstTraverser, _ast_nodes().Node
    plain_child_hook = DepthFirstTraverser.pre_processing_of_child

    def traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
        cls = type(node)
        if cls not in _IS_NODE:
            _IS_NODE[cls] = issubclass(cls, Node)
        if not _IS_NODE[cls]:
            return node
        parent_node = node.parent
        if node.children is not None:
            hook = type(self).pre_processing_of_child is not plain_child_hook
            for i, child_node in enumerate(node.children):
                if hook:
                    self.pre_processing_of_child(node, i)
                self.traverse_node_recursively(child_node, i)
        process = _handler(self, cls)
        if process is not None:
            node = process(self, node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    DepthFirstTraverser.traverse_node_recursively = traverse_node_recursively


def _copied(node: Any, parent: Any = None) -> Any:
    """A tree's copy, node by node: a node holds its children, its parent and its type's name."""
    Node = _ast_nodes().Node
    twin = object.__new__(type(node))
    twin.__dict__.update(node.__dict__)
    twin.parent = parent
    if node.children is not None:
        twin.children = [
            _copied(child, twin) if isinstance(child, Node) else deepcopy(child) for child in node.children
        ]
    return twin


def _validator_checking_expressions_once(validators: Any) -> type:
    expression_only = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )
    checked: dict[tuple[Any, ...], Any] = {}  # -> the tree, held so that its identity is not reused
    lock = threading.Lock()
    original_processors = validators.UpdateExpressionValidator.get_ast_processors

    class UpdateExpressionValidator(validators.UpdateExpressionValidator):
        checks_once = True

        def __init__(
            self,
            expression: Any,
            expression_attribute_names: dict[str, str],
            expression_attribute_values: dict[str, dict[str, Any]],
            item: Any,
            table: Any,
        ) -> None:
            self.expression_attribute_names = expression_attribute_names
            self.expression_attribute_values = expression_attribute_values
            self.item = item
            self.table = table
            # the tree's identity: update expressions are parsed once per text (moto_patches.py keeps the parse)
            self.checks = (
                id(expression),
                tuple(sorted((expression_attribute_names or {}).items())),
                tuple(table.table_key_attrs),
            )
            self.processors = self.get_ast_processors()
            self.node_to_validate = _copied(expression)
            self.expression = expression

        def get_ast_processors(self) -> list[Any]:
            processors = original_processors(self)
            with lock:
                known = self.checks in checked
            return [p for p in processors if not isinstance(p, expression_only)] if known else processors

        def validate(self) -> Any:
            validated = super().validate()
            with lock:
                if len(checked) >= CHECKED_EXPRESSIONS:
                    checked.clear()
                checked[self.checks] = self.expression
            return validated

    return UpdateExpressionValidator


def _users_of(cls: type) -> list[Any]:
    """The moto modules that imported the validator by name (they hold their own reference)."""
    import sys

    return [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("moto.dynamodb") and getattr(module, "UpdateExpressionValidator", None) is cls
    ]


def patch_moto_json_errors() -> None:
    """moto builds an XML body for every error it constructs, then a JSON error replaces it with its own. Resolving
    an update's path to an attribute the item does not have raises such an error, caught inside the update (an `ADD`
    to a new counter): one XML document rendered and thrown away per update. A JSON error now renders its JSON body
    only; its code, message, headers and body are the same."""
    import json

    from moto.core.exceptions import HTTPException, JsonRESTError

    if getattr(JsonRESTError.__init__, "json_only", False):
        return

    def __init__(self: Any, error_type: str, message: str, _: str = "", **__: Any) -> None:
        HTTPException.__init__(self)
        self.error_type = error_type
        self.message = message
        self.description = json.dumps({"__type": self.error_type, "message": self.message})
        self.content_type = "application/json"

    __init__.json_only = True  # type: ignore[attr-defined]
    JsonRESTError.__init__ = __init__  # type: ignore[method-assign]
