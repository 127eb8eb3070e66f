"""LoRA adapters per request (issue 53): PEFT adapters mapped onto the model's linears
(`engine.lora.adapter`), the rows of a step grouped by adapter (`engine.lora.layer`), and the
registry of loaded adapters (`engine.lora.manager`). See docs/lora.md."""
