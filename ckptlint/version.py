"""The release version, in a module of its own: the cache key, reporters and front-ends read it
without importing the package face (which names the engine)."""

__version__ = "0.1.0"
