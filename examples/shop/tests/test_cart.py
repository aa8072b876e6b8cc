import pytest

from shop import Cart, total_price


def test_total_without_discount():
    assert total_price([1.0, 2.5]) == 3.5


def test_total_with_discount():
    assert total_price([10.0, 10.0], discount=0.1) == 18.0


def test_cart_total():
    cart = Cart()
    cart.add("tea", 4.0)
    cart.add("cake", 6.0)
    assert cart.total(discount=0.5) == 5.0


def test_negative_price_rejected():
    with pytest.raises(ValueError):
        Cart().add("refund", -1.0)
