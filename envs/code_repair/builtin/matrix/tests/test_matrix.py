from fractions import Fraction as F

import pytest

from matrix import Matrix, MatrixError, SingularMatrixError


def test_construction_and_shape():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    assert m.shape == (2, 3)
    assert m[1, 2] == 6
    assert isinstance(m[0, 0], F)


def test_ragged_and_empty_rejected():
    with pytest.raises(MatrixError):
        Matrix([[1, 2], [3]])
    with pytest.raises(MatrixError):
        Matrix([])


def test_entries_from_strings_and_floats():
    m = Matrix([["1/3", 0.5]])
    assert m.row(0) == [F(1, 3), F(1, 2)]


def test_add_sub_neg():
    a = Matrix([[1, 2], [3, 4]])
    b = Matrix([[5, 6], [7, 8]])
    assert a + b == Matrix([[6, 8], [10, 12]])
    assert b - a == Matrix([[4, 4], [4, 4]])
    assert -a == Matrix([[-1, -2], [-3, -4]])
    with pytest.raises(MatrixError):
        a + Matrix([[1, 2]])


def test_scalar_multiplication():
    a = Matrix([[1, 2], [3, 4]])
    assert 2 * a == a * 2 == Matrix([[2, 4], [6, 8]])
    assert a * F(1, 2) == Matrix([["1/2", 1], ["3/2", 2]])


def test_square_product():
    a = Matrix([[1, 2], [3, 4]])
    b = Matrix([[0, 1], [1, 0]])
    assert a @ b == Matrix([[2, 1], [4, 3]])
    assert a * b == a @ b


def test_product_shape_mismatch():
    with pytest.raises(MatrixError):
        Matrix([[1, 2]]) @ Matrix([[1, 2]])


def test_transpose():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    assert m.T == Matrix([[1, 4], [2, 5], [3, 6]])
    assert m.T.T == m


def test_identity_and_power():
    a = Matrix([[1, 1], [1, 0]])
    assert a ** 0 == Matrix.identity(2)
    assert (a ** 10)[0, 1] == 55  # Fibonacci


def test_trace():
    assert Matrix([[1, 2], [3, 4]]).trace() == 5


def test_determinant_simple():
    assert Matrix([[3]]).det() == 3
    assert Matrix([[1, 2], [3, 4]]).det() == -2
    assert Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]]).det() == 6


def test_determinant_singular():
    assert Matrix([[1, 2], [2, 4]]).det() == 0


def test_inverse():
    a = Matrix([[4, 7], [2, 6]])
    inv = a.inverse()
    assert inv == Matrix([["3/5", "-7/10"], ["-1/5", "2/5"]])
    assert a @ inv == Matrix.identity(2)


def test_inverse_needs_pivoting():
    a = Matrix([[0, 1], [1, 0]])
    assert a.inverse() == a


def test_singular_inverse_raises():
    with pytest.raises(SingularMatrixError):
        Matrix([[1, 2], [2, 4]]).inverse()


def test_negative_power():
    a = Matrix([[2, 0], [0, 4]])
    assert a ** -1 == Matrix([["1/2", 0], [0, "1/4"]])


def test_rank():
    assert Matrix([[1, 2], [2, 4]]).rank() == 1
    assert Matrix([[1, 0, 0], [0, 1, 0]]).rank() == 2
    assert Matrix.zeros(3, 3).rank() == 0


def test_solve():
    a = Matrix([[2, 1], [1, 3]])
    assert a.solve([3, 5]) == [F(4, 5), F(7, 5)]
