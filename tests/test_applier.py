"""`patch` / `unpatch`: install on classes, restore exactly what was there, and nothing else."""

from __future__ import annotations

import inspect
import subprocess
import sys
import unittest

import torch
from transformers import GPT2LMHeadModel

import cachelimit
from tests.common import build_tiny_model, left_padded_batch, returned_cache

#: the served families this transformers has (patch() patches those)
CLASSES = {
    name: cls for name, family in cachelimit.FAMILIES.items() if family.available for cls in family.model_classes
}
METHODS = ("generate", "prepare_inputs_for_generation")
_MISSING = object()


def own_methods() -> dict[tuple[str, str], object]:
    """Each class's own attribute (not an inherited one) for every method cachelimit replaces."""
    return {(family, name): cls.__dict__.get(name, _MISSING) for family, cls in CLASSES.items() for name in METHODS}


class ApplierTest(unittest.TestCase):
    def setUp(self):
        cachelimit.unpatch()
        self.addCleanup(cachelimit.patch)  # the other tests build patched models

    def test_supported_families(self):
        available = [name for name in cachelimit.supported_families() if cachelimit.FAMILIES[name].available]
        self.assertEqual(available, sorted(CLASSES))

    def test_patched_context_manager(self):
        originals = own_methods()
        cachelimit.patch("llama")
        with cachelimit.patched("qwen3", "llama"):
            self.assertTrue(cachelimit.is_patched("qwen3") and cachelimit.is_patched("llama"))
        self.assertFalse(cachelimit.is_patched("qwen3"))
        self.assertTrue(cachelimit.is_patched("llama"))  # patched before the block: stays patched
        cachelimit.unpatch("llama")
        with self.assertRaisesRegex(RuntimeError, "inside"), cachelimit.patched():
            self.assertTrue(all(map(cachelimit.is_patched, CLASSES)))  # every family this transformers has
            raise RuntimeError("inside")
        self.assertEqual(own_methods(), originals)  # unpatched even when the block raised
        with self.assertRaisesRegex(ValueError, "supported families: .*qwen3"):
            cachelimit.patched("gpt3").__enter__()

    def test_unpatch_restores_the_original_function_objects(self):
        originals = own_methods()
        cachelimit.patch()
        patched = own_methods()
        for key, original in originals.items():
            self.assertIsNot(patched[key], original, key)
        cachelimit.unpatch()
        for key, restored in own_methods().items():
            self.assertIs(restored, originals[key], key)
        # an inherited method stays inherited (no copy left on the class)
        self.assertNotIn("generate", GPT2LMHeadModel.__dict__)

    def test_patch_twice_and_unpatch_unpatched_are_no_ops(self):
        originals = own_methods()
        cachelimit.unpatch("gpt2")
        self.assertEqual(own_methods(), originals)
        cachelimit.patch("gpt2")
        once = own_methods()
        cachelimit.patch("gpt2", "gpt2")
        cachelimit.patch("gpt2")
        self.assertEqual(own_methods(), once)
        cachelimit.unpatch("gpt2")
        self.assertEqual(own_methods(), originals)

    def test_patch_one_family_leaves_the_others_alone(self):
        originals = own_methods()
        cachelimit.patch("llama")
        self.assertTrue(cachelimit.is_patched("llama"))
        self.assertFalse(cachelimit.is_patched("gpt2"))
        for (family, name), method in own_methods().items():
            (self.assertIsNot if family == "llama" else self.assertIs)(method, originals[(family, name)])

    def test_patch_without_arguments_patches_every_family(self):
        cachelimit.patch()
        self.assertTrue(all(cachelimit.is_patched(name) for name in CLASSES))  # every family this transformers has
        cachelimit.unpatch()
        self.assertFalse(any(cachelimit.is_patched(name) for name in cachelimit.supported_families()))

    def test_unknown_family_is_a_value_error_listing_the_supported_ones(self):
        for call in (cachelimit.patch, cachelimit.unpatch):
            with self.subTest(call=call.__name__), self.assertRaises(ValueError) as caught:
                call("gpt3")
            message = str(caught.exception)
            self.assertIn("gpt3", message)
            for name in cachelimit.supported_families():
                self.assertIn(name, message)
        self.assertFalse(cachelimit.is_patched("gpt2"))

    def test_existing_instances_see_patch_and_unpatch(self):
        config = build_tiny_model("gpt2").config
        cachelimit.unpatch("gpt2")
        model = GPT2LMHeadModel(config).eval()  # created while unpatched
        model.generation_config.pad_token_id = 0
        ids, mask = left_padded_batch([4, 6])
        options = dict(max_new_tokens=3, cache_limit=2, return_dict_in_generate=True)
        with self.assertRaisesRegex(ValueError, "cache_limit"):  # transformers rejects the unknown argument
            model.generate(ids, attention_mask=mask, **options)
        cachelimit.patch("gpt2")
        self.assertIsInstance(
            returned_cache(model.generate(ids, attention_mask=mask, **options)), cachelimit.BoundedCache
        )
        cachelimit.unpatch("gpt2")
        with self.assertRaisesRegex(ValueError, "cache_limit"):
            model.generate(ids, attention_mask=mask, **options)

    def test_subclass_of_a_patched_class(self):
        class MyGPT2(GPT2LMHeadModel):
            pass

        parent = build_tiny_model("gpt2")
        child = MyGPT2(parent.config).eval()
        child.load_state_dict(parent.state_dict())
        child.generation_config = parent.generation_config
        ids, mask = left_padded_batch([7, 3])
        options = dict(max_new_tokens=6, cache_limit=2, return_dict_in_generate=True, output_logits=True)
        mine = child.generate(ids, attention_mask=mask, **options)
        theirs = parent.generate(ids, attention_mask=mask, **options)
        self.assertIsInstance(returned_cache(mine), cachelimit.BoundedCache)
        self.assertTrue(torch.equal(mine.sequences, theirs.sequences))
        for a, b in zip(mine.logits, theirs.logits, strict=True):
            self.assertTrue(torch.equal(a, b))
        cachelimit.unpatch("gpt2")
        with self.assertRaisesRegex(ValueError, "cache_limit"):
            child.generate(ids, attention_mask=mask, **options)

    def test_cache_limit_is_a_named_parameter_of_prepare_inputs(self):
        """`generate` checks its kwargs against this signature; `**kwargs` alone would not pass them on."""
        cachelimit.patch()
        for family, cls in CLASSES.items():
            parameters = inspect.signature(cls.prepare_inputs_for_generation).parameters
            for name in ("cache_limit", "num_sink_tokens"):
                with self.subTest(family=family, name=name):
                    self.assertIn(name, parameters)
                    self.assertIsNot(parameters[name].kind, inspect.Parameter.VAR_KEYWORD)
                    self.assertIsNone(parameters[name].default)


class SignatureTest(unittest.TestCase):
    def test_patched_prepare_forwards_inputs_embeds_where_the_original_does(self):
        """transformers generates from `inputs_embeds` only where `prepare_inputs_for_generation` names it
        (Nemotron-H's does not: it refuses); patched or not, every served class says the same (a peer-suite test
        ran instead of skipping when the patch named it everywhere)."""
        cachelimit.unpatch()
        self.addCleanup(cachelimit.patch)  # the other tests build patched models
        classes = [cls for family in cachelimit.FAMILIES.values() if family.available for cls in family.model_classes]
        before = {
            cls: "inputs_embeds" in inspect.signature(cls.prepare_inputs_for_generation).parameters for cls in classes
        }
        cachelimit.patch()
        for cls in classes:
            with self.subTest(cls=cls.__name__):
                parameters = inspect.signature(cls.prepare_inputs_for_generation).parameters
                self.assertEqual("inputs_embeds" in parameters, before[cls])
                self.assertIn("cache_limit", parameters)


class FreshProcessTest(unittest.TestCase):
    def test_first_patch_installs_every_method(self):
        """In a fresh process the public `patch()` is the first use of the package: the methods other modules
        hand to the applier (`set_cache_implementation`, from the registry) must be installed all the same."""
        code = (
            "import cachelimit; from transformers import LlamaForCausalLM; cachelimit.patch('llama'); "
            "print(callable(getattr(LlamaForCausalLM, 'set_cache_implementation', None)))"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        self.assertEqual(result.stdout.strip(), "True", result.stderr[-2000:])
