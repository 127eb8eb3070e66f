"""What runs when: the scheduler and its output, the waiting queues, agent programs, KV retention through tool
calls, tool gaps and the step budget.
"""
