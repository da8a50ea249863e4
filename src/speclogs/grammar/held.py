"""A pattern's definition, held unbuilt: its pyparsing element (speclogs.grammar.definition) is built the first time
it is needed, so loading grammars for an ingest, which runs only the compiled regexes, never imports pyparsing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyparsing as pp


class Definition:
    """A pattern's pyparsing element, built the first time it is needed (validating samples, explaining a near miss):
    loading grammars for an ingest needs only their regexes. One per pattern; `element` is then kept."""

    def __init__(self, nodes: tuple, name: str, *, field_types: dict[str, str], field_shapes: dict[str, str | None],
                 shape_specs: dict[str, dict], where: str) -> None:
        self._arguments = (nodes, name, field_types, field_shapes, shape_specs, where)
        self._element: pp.ParserElement | None = None

    @property
    def element(self) -> pp.ParserElement:
        if self._element is None:
            from speclogs.grammar.definition import pattern_element

            nodes, name, field_types, field_shapes, shape_specs, where = self._arguments
            self._element = pattern_element(nodes, name, field_types=field_types, field_shapes=field_shapes,
                                            shape_specs=shape_specs, where=where)
        return self._element
