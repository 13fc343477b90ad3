"""The modules beside a class's own that use it: the files of its package directory that name
both the class and its module (a model's encoder defined in `vae.py` and built in
`autoencoder_tiny.py`; timm's `EfficientNetBuilder` configured in `efficientnet.py`).

Read from the directory, never from what happens to be loaded: an answer that depended on which
files a worker had analysed before would make one file's findings depend on the order of the run
(and on `-j`). What is read is recorded with `Project.consult`, on every answer, memoised or not,
so that each analysed file that asks depends on those modules in the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from ckptlint.classes import ClassInfo
from ckptlint.project import Project, code_words
from ckptlint.symbols import ModuleSymbols

Files = list[tuple[str, str, bytes]]  # (file name, path, its bytes)


class ModulesBeside:
    def __init__(self, project: Project):
        self.project = project
        self._found: dict[int, tuple[list[ModuleSymbols], dict[str, str]]] = {}  # by id of the class scope
        self._files_by_directory: dict[str, Files] = {}
        self._words: dict[str, frozenset[bytes]] = {}  # path -> its code's words, for the files that spell both names somewhere

    def of(self, info: ClassInfo) -> list[ModuleSymbols]:
        """The class's module, then the modules beside it whose code names the class and its
        module, in file-name order."""
        memo = self._found.get(id(info.scope))
        if memo is None:
            memo = self._found[id(info.scope)] = self._read(info)
        self.project.consult(info.module.source.path, memo[1])
        return memo[0]

    def _read(self, info: ClassInfo) -> tuple[list[ModuleSymbols], dict[str, str]]:
        """`of`, read from the directory: (the modules, path -> digest of those read)."""
        module = info.module
        found = [module]
        consulted: dict[str, str] = {}
        own_module = self.project.loaded_at(module.source.path)
        if own_module is not None:  # the engine redoes the entry when a file beside it comes to name it (engine/reuse.py)
            consulted[os.fspath(own_module.path)] = own_module.digest
        directory = os.path.dirname(module.source.path)
        project = self.project
        # a user imports the class from its module (`from .vae import EncoderTiny`): a file that
        # names the class but never the module defines its own (transformers' modular_*.py)
        stem = os.path.basename(module.source.path)[:-3].encode()
        name = info.name.encode()
        own = os.path.abspath(module.source.path)
        for entry, path, data in self._directory_files(directory):
            # a word of a file's code is in its bytes: most files fail there, before their
            # comments are stripped and their words split (8% of a cold run on transformers)
            if name not in data or stem not in data or os.path.abspath(path) == own:
                continue
            words = self._words.get(path)
            if words is None:
                words = self._words[path] = code_words(data)
            if name not in words or stem not in words:
                continue
            try:  # by its path: by name, a top-level sibling could be another root's module of that name
                sibling = project.load(Path(path))
            except OSError:
                continue
            consulted[os.fspath(sibling.path)] = sibling.digest  # one that does not parse too: fixing it changes the answer
            if sibling.symbols is not None:
                found.append(sibling.symbols)
        return found, consulted

    def _directory_files(self, directory: str) -> Files:
        """(file name, path, its bytes) for each module of a directory but `__init__.py`, read once."""
        found = self._files_by_directory.get(directory)
        if found is None:
            found = self._files_by_directory[directory] = []
            for entry in self.project.module_files(directory):
                path = os.path.join(directory, entry)
                try:
                    found.append((entry, path, self.project.file_data(path)))
                except OSError:
                    continue
        return found
