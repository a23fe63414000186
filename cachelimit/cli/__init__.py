"""The command line (`cachelimit ...`, `python -m cachelimit`): the parser and dispatch (`main`), the commands
(`generate_command`, `demo`), their terminal UI (`terminal`), the models they run (`model_argument`: what a MODEL
argument names; `pretrained`: real models shipped in pip packages; `tiny_model`: the built-in one) and the one-line
errors (`errors`). It sits on top of the library and is imported only by `python -m cachelimit` and the entry point.
"""
