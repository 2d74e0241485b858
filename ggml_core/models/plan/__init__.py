"""Planning a model before anything is allocated: where each layer and weight goes, and whether it fits.

- :mod:`.placement`: the layer split over the devices (``-ngl``, ``-sm``, ``-ts``) and each device's share
- :mod:`.bufts`: each weight's buffer type and each layer's cache device, probed with ``supports_op``
- :mod:`.fit`: ``--fit``, the context and offloaded layers measured to fit each device's free memory
- :mod:`.autosplit`: ``--split-mode auto``, the split from each device's measured speed on one layer
- :mod:`.planner`: the whole plan of a model (:func:`~.planner.plan_model`), which :class:`~ggml_core.models.Model`
  loads from

:mod:`.placement` and :mod:`.bufts` are the plan's data and rules: the weights and the KV cache
(:mod:`ggml_core.models.weights`, :mod:`ggml_core.models.kvcache`) are laid out from a
:class:`~.placement.Placement`. :mod:`.fit`, :mod:`.autosplit` and :mod:`.planner` measure real graphs built from
those, so they come after them; this package therefore imports none of its modules here.
"""
