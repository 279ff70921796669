"""Incidents: related fault events of one node grouped into one record (an Xid burst, a lost
GPU with its Xid 79 …), closed after a quiet period; owns ``incident`` and ``incident_event``."""
