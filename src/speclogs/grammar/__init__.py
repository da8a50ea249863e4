"""Line grammars: data files under grammars/, each pattern's template compiled to a pyparsing element (the definition
and validator) and to one regex (what the ingest runs, on polars).

    load_grammars(extra_paths) -> GrammarSet      bundled grammars + user files; raises GrammarError
    check_grammar_files(paths) -> list[GrammarProblem]
"""

from speclogs.grammar.loader import bundled_grammar_files, check_grammar_files, load_grammars
from speclogs.grammar.model import GrammarProblem, GrammarSet, Pattern, cast_expr, split_rank_tags

__all__ = ["GrammarProblem", "GrammarSet", "Pattern", "bundled_grammar_files", "cast_expr", "check_grammar_files", "load_grammars",
           "split_rank_tags"]
