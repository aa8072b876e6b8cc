from __future__ import annotations


def total_price(prices: list[float], discount: float = 0.0) -> float:
    """Sum of ``prices`` less a fractional ``discount`` (0.1 is 10% off)."""
    subtotal = sum(prices)
    return round(subtotal - discount, 2)


class Cart:
    def __init__(self) -> None:
        self.items: dict[str, float] = {}

    def add(self, name: str, price: float) -> None:
        if price < 0:
            raise ValueError("price must not be negative")
        self.items[name] = price

    def total(self, discount: float = 0.0) -> float:
        return total_price(list(self.items.values()), discount)
