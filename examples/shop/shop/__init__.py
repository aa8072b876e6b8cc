"""A tiny shop: the repository the Quick start observes."""

from .cart import Cart, total_price

__all__ = ["Cart", "total_price"]
