"""pagesim.dashboard.json_shape: the first field a JSON file breaks, named in the file's own path form."""

from __future__ import annotations

from pagesim.dashboard.json_shape import number, shape_problem

SCHEMA = {"type": "object", "required": ["rows"], "properties": {
    "rows": {"type": "array", "minItems": 1, "expected": "a non-empty list of rows",
             "items": {"type": "object", "expected": "a row object", "required": ["n"],
                       "properties": {"n": number("a whole number", whole=True), "x": number(null=True),
                                      "t": {"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^[0-9]+s$"}],
                                            "expected": "seconds, or a text such as '5s'"}}}}}}


def test_a_file_that_fits_has_no_problem_and_whole_numbers_may_be_written_as_floats():
    assert shape_problem({"rows": [{"n": 2}, {"n": 2.0, "x": None, "t": "5s"}]}, SCHEMA) is None


def test_the_first_field_in_the_file_is_named_with_what_it_expected_and_what_it_got():
    assert shape_problem({"rows": [1, {}]}, SCHEMA) == "rows[0]: expected a row object, got 1"
    assert shape_problem({"rows": [{"n": 1}, {"n": 1.5}]}, SCHEMA) == "rows[1].n: expected a whole number, got 1.5"
    assert shape_problem({"rows": [{"n": True}]}, SCHEMA) == "rows[0].n: expected a whole number, got True"  # no bool
    assert shape_problem({"rows": []}, SCHEMA) == "rows: expected a non-empty list of rows, got an empty list"


def test_a_missing_field_is_named_as_the_field_got_none_and_an_any_of_as_a_whole():
    assert shape_problem({"rows": [{"x": 1}]}, SCHEMA) == "rows[0].n: expected a whole number, got None"
    assert shape_problem({"rows": [{"n": 1, "t": "5 min"}]}, SCHEMA) == (
        "rows[0].t: expected seconds, or a text such as '5s', got '5 min'")
    assert shape_problem({}, SCHEMA) == "rows: expected a non-empty list of rows, got None"
    assert shape_problem([], SCHEMA) == "the file: [] is not of type 'object'"  # no words of its own: the library's
