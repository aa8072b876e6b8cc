"""The driver's parts (`aexec._boundary.driver`): never imported as aexec modules.

The driver runs by path in the candidate's interpreter, where aexec may not be
importable and a module of the candidate's must never be shadowed. So these files use
the standard library only, and the driver loads each by path, outside ``sys.modules``
(``driver._load``). What a part needs of aexec's (the wire, another part) the loader
puts in its globals before it runs; its ``if TYPE_CHECKING:`` imports name the same
modules for the type checker.
"""
