"""What an expression is across the project: types and abstract values.

- `protocol.py`: the evaluator's interface, which its plugins take instead of the evaluator.
- `values.py`: abstract values (where an object comes from, what it is).
- `evaluator.py`: `TypeInference`, types of expressions from the bindings that produce them.
- `modules.py`: how model code builds its modules beyond `self.x = Block()`.
- `factories.py`: where a class handed to a model factory gets its constructor keywords.
- `module_structure.py`: what an `nn.Module` holds and calls: children, submodules, methods.
- `zoo.py`: what builders, registries and configurations choose to build.
- `registries.py`: literal keys, config dicts and registries of model zoos.
- `config_fields.py`: name fields of configuration dataclasses.
- `config_objects.py`: config objects as built (dataclass fields a construction gave, `cfg.build()`, module specs).
- `run_arguments.py`: the default configuration a project's command line gives (argparse defaults).
- `instance_flags.py`: what an instance's flag holds (`self.use_checkpoint`), when nothing but its constructor sets it.
- `call_sites.py`: what a parameter receives from its module's calls.
- `method_callers.py`: who calls a method, and with what.
- `modules_beside.py`: the modules beside a class's own that use it (read from its directory).
- `autograd_functions.py`: what `SomeFunction.apply(x)` of a project autograd Function runs.
- `version_tests.py`: tests of a library's version, decided by the version the code runs with.
- `known_truth.py`: tests whose outcome is known in an analysis context.
- `reaching.py`: which bindings and returns a use can see, under the arguments being evaluated.
- `folding.py`: calls computed from constants on the function's syntax (architecture strings decoded).
- `constant_calls.py`: which calls are folded, with which constant arguments, and the result's types.
"""
