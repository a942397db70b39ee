import io

import pytest

from csvkit_lite import Table, infer_column, parse_value, read_csv

SALES = """region,product,units,price,paid
north,apple,10,0.5,true
south,apple,4,0.55,false
north,pear,3,,yes
south,pear,,0.8,no
north,apple,1,0.5,true
"""


def test_infer_basic_types():
    assert infer_column(["1", "2", "30"]) is int
    assert infer_column(["1", "2.5"]) is float
    assert infer_column(["1e3", "2"]) is float
    assert infer_column(["true", "No"]) is bool
    assert infer_column(["a", "1"]) is str


def test_infer_ignores_blank_cells():
    assert infer_column(["", " 4 ", "  "]) is int
    assert infer_column(["", ""]) is str


def test_nan_is_not_a_float():
    assert infer_column(["1.5", "nan"]) is str


def test_parse_value():
    assert parse_value(" 12 ", int) == 12
    assert parse_value("", float) is None
    assert parse_value("Yes", bool) is True
    assert parse_value("x", str) == "x"


def test_read_csv_types_and_values():
    t = read_csv(SALES)
    assert t.types == {"region": str, "product": str, "units": int, "price": float, "paid": bool}
    assert t.rows[0] == ("north", "apple", 10, 0.5, True)
    assert t.rows[2] == ("north", "pear", 3, None, True)
    assert len(t) == 5


def test_read_csv_from_file_and_delimiter():
    t = read_csv(io.StringIO("a;b\n1;x\n2;y\n"), delimiter=";")
    assert t.column("a") == [1, 2]


def test_quoted_fields():
    t = read_csv('name,note\n"Smith, J","said ""hi"""\n')
    assert t.rows == [("Smith, J", 'said "hi"')]


def test_short_rows_padded_long_rows_rejected():
    assert read_csv("a,b,c\n1,2\n").rows == [(1, 2, None)]
    with pytest.raises(ValueError):
        read_csv("a,b\n1,2,3\n")


def test_blank_lines_skipped_and_header_stripped():
    t = read_csv(" a , b \n\n1,2\n\n")
    assert t.columns == ["a", "b"]
    assert t.rows == [(1, 2)]


def test_empty_csv():
    with pytest.raises(ValueError):
        read_csv("\n\n")


def test_no_inference():
    t = read_csv("a\n1\n\n", infer=False)
    assert t.rows == [("1",)]


def test_select_and_missing_column():
    t = read_csv(SALES).select("product", "units")
    assert t.columns == ["product", "units"]
    assert t.rows[1] == ("apple", 4)
    with pytest.raises(KeyError):
        t.select("region")


def test_where():
    t = read_csv(SALES).where(lambda r: r["region"] == "south")
    assert t.column("product") == ["apple", "pear"]


def test_sort_by_puts_missing_last():
    t = read_csv(SALES).sort_by("units", reverse=True)
    assert t.column("units") == [10, 4, 3, 1, None]


def test_group_sum():
    t = read_csv(SALES)
    assert t.group_sum("product", "units") == {"apple": 15, "pear": 3}
    assert t.group_sum("region", "units") == {"north": 14, "south": 4}


def test_duplicate_columns_rejected():
    with pytest.raises(ValueError):
        Table(["a", "a"], [])


def test_to_csv_roundtrip():
    t = read_csv(SALES)
    again = read_csv(t.to_csv())
    assert again.rows == t.rows
    assert t.to_csv().splitlines()[4] == "south,pear,,0.8,false"
